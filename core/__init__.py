"""hongbao.core: money in integer fen, the split policy, order ids, the services
(hongbao.core.services), the ports they depend on and the adapters that implement them
(docs/architecture.md section 1)."""
