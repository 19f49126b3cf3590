"""Build `hongbao` from the top-level folders: core/ -> hongbao.core, server/ -> hongbao.server,
bench/ -> hongbao.bench (docs/architecture.md section 1). Metadata lives in pyproject.toml.

`hongbao` itself is a namespace package (PEP 420): the repository has no `hongbao/` folder, so
a test run from the checkout never shadows the installed mapping."""

from setuptools import setup

PACKAGES = {
    "hongbao.core": "core",
    "hongbao.core.adapters": "core/adapters",
    "hongbao.core.adapters.sqlite": "core/adapters/sqlite",
    "hongbao.core.adapters.mysql": "core/adapters/mysql",
    "hongbao.core.adapters.redis": "core/adapters/redis",
    "hongbao.core.services": "core/services",
    "hongbao.server": "server",
    "hongbao.server.static": "server/static",  # data only (the push clients' JS and demo page)
    "hongbao.server.docs": "docs",  # data only (openapi.yaml, served at /v1/openapi.yaml)
    "hongbao.bench": "bench",
    "hongbao.bench.http": "bench/http",
    "hongbao.bench.push": "bench/push",
    "hongbao.bench.storm": "bench/storm",
    "hongbao.bench.baselines": "bench/baselines",
    "hongbao.bench.services": "bench/services",
    "hongbao.bench.chaos": "bench/chaos",
}

setup(
    packages=list(PACKAGES),
    package_dir=PACKAGES,
    package_data={name: ["py.typed"] for name in PACKAGES}
    | {"hongbao.server.static": ["*.js", "*.html"], "hongbao.server.docs": ["openapi.yaml"]},
)
