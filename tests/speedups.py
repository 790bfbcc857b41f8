"""The optional C extensions in tests: built from source where the install did not build them
(each is tested against its Python reference either way), and whether the install did."""

from __future__ import annotations

import importlib.util
import sysconfig
from pathlib import Path
from types import ModuleType

from ticdc_lake.protocols import native


def build_extension(source: Path, directory: Path) -> ModuleType:
    """Compile ``source`` as setuptools' build_ext would, into ``directory``, and load it."""
    from setuptools import Distribution, Extension

    name = source.stem
    command = Distribution({"name": name, "ext_modules": [Extension(name, [str(source)])]})
    build = command.get_command_obj("build_ext")
    build.build_lib = str(directory)
    build.build_temp = str(directory / "tmp")
    build.ensure_finalized()
    build.run()
    (path,) = directory.glob(f"{name}*.so")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def native_source(module: str) -> Path:
    """The C source of the decoder extension ``module`` (ticdc_lake.protocols.native)."""
    return Path(native.__file__).with_name(f"{module}.c")


def extension_built(source: Path, module: str) -> bool:
    """Whether the install built ``source`` (beside it, or importable as ``module``)."""
    built = source.with_name(source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    return built.exists() or importlib.util.find_spec(module) is not None
