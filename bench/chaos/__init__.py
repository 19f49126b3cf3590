"""The chaos run (``make chaos``): the storm while workers are killed and Redis and MariaDB fail,
then the money audit and the node's health (hongbao.bench.chaos.run)."""
