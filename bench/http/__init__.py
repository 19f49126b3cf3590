"""hongbao.bench.http: the HTTP benchmark of issue 3 (wrk against the server and a Python ceiling)."""
