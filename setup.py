"""The compiled core (simstudy/backends/flowsim/_core.pyx, Cython in C++ mode), built where a C++
compiler is present. It is optional: without a compiler the build goes on without it, and flowsim
runs its Python engine (`simstudy run` says so once)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # Cython is a build requirement (pyproject.toml); without it, no compiled core
    ext_modules = []
else:
    ext_modules = cythonize(
        [Extension("simstudy.backends.flowsim._core", ["simstudy/backends/flowsim/_core.pyx"], language="c++",
                   extra_compile_args=["-O2", "-std=c++17"], optional=True)],
        compiler_directives={"language_level": "3"}, quiet=True)

setup(ext_modules=ext_modules)
