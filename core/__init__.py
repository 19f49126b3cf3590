"""hongbao.core: money in integer fen, the split policy, order ids, and (with the service issue)
the packet services and the ports their storage adapters implement."""
