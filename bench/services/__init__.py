"""Real services started on loopback for the benchmarks, the chaos run and the tests: processes
(``process``), a MariaDB server (``mariadb``), standalone Redis servers and a Redis Cluster (``redis``)."""
