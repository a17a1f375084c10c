"""setuptools drives CMake: one extension, torchlite._C, built with Ninja."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import pybind11

        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        tag = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
        # NOTE: a stable build folder (not setuptools' temp dir) so rebuilds are incremental.
        build_dir = ROOT / "build" / tag
        build_dir.mkdir(parents=True, exist_ok=True)
        cfg = os.environ.get("TORCHLITE_BUILD_TYPE", "Release")
        args = [
            f"-DCMAKE_BUILD_TYPE={cfg}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DTORCHLITE_EXT_OUTPUT_DIR={out_dir}",
            f"-DTORCHLITE_EXT_SUFFIX={sysconfig.get_config_var('EXT_SUFFIX')}",
        ]
        for opt in (
            "TORCHLITE_WITH_LLVM",
            "TORCHLITE_WITH_CUDA",
            "TORCHLITE_BUILD_TESTS",
            "TORCHLITE_STATIC_LIBSTDCXX",
            "TORCHLITE_SANITIZE",
        ):
            if opt in os.environ:
                args.append(f"-D{opt}={os.environ[opt]}")
        generator = ["-G", "Ninja"] if not (build_dir / "CMakeCache.txt").exists() else []
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator, *args])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "_C", "-j", jobs])


setup(ext_modules=[CMakeExtension("torchlite._C")], cmdclass={"build_ext": CMakeBuild})
