"""hongbao.server: the process model, HTTP and WebSocket protocols, push, and the `hongbao` CLI."""
