"""The compiled core (simstudy/backends/flowsim/_core.pyx, Cython in C++ mode), built where a C++
compiler is present. It is optional: where it cannot be built (no compiler), the install goes on
without it, says so in one line, and flowsim runs its Python engine (`simstudy run` says so once)."""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that lets the compiled core fail: simstudy installs and runs without it."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # no compiler, or one that fails: the Python engine runs instead
            print(f"simstudy: the compiled core ({ext.name}) was not built ({' '.join(str(exc).split())[:200]}); "
                  "flowsim will run its Python engine", file=sys.stderr)


try:
    from Cython.Build import cythonize
except ImportError:  # Cython is a build requirement (pyproject.toml); without it, no compiled core
    ext_modules = []
else:
    ext_modules = cythonize(
        [Extension("simstudy.backends.flowsim._core", ["simstudy/backends/flowsim/_core.pyx"], language="c++",
                   extra_compile_args=["-O2", "-std=c++17"])],
        compiler_directives={"language_level": "3"}, quiet=True)

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
