"""Build `hongbao` from the top-level folders: core/ -> hongbao.core, server/ -> hongbao.server,
bench/ -> hongbao.bench (DESIGN.md section 1). Metadata lives in pyproject.toml."""

from setuptools import setup

PACKAGES = {
    "hongbao": "hongbao",
    "hongbao.core": "core",
    "hongbao.server": "server",
    "hongbao.bench": "bench",
}

setup(
    packages=list(PACKAGES),
    package_dir=PACKAGES,
    package_data={"hongbao": ["py.typed"]},
)
