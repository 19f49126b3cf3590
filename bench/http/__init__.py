"""hongbao.bench.http: the HTTP benchmark (wrk against the server and a Python ceiling)."""
