"""The build's one step pyproject.toml cannot say: leave pytest's scaffolding out of the wheel.

workbench/conftest.py configures the doctest collection of the package (it must sit in the
package's folder: see its docstring); setuptools puts every module of a listed package into
the wheel and has no per-module exclude, so build_py drops it here. The sdist keeps it
(MANIFEST.in), so its tests run as a checkout's do. Everything else is in pyproject.toml.
"""
from setuptools import setup
from setuptools.command.build_py import build_py

TEST_SCAFFOLDING = {("workbench", "conftest")}   # (package, module)


class BuildPyWithoutTestScaffolding(build_py):
    """setuptools' build_py, less the modules in TEST_SCAFFOLDING."""

    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir) if (m[0], m[1]) not in TEST_SCAFFOLDING]


setup(cmdclass={"build_py": BuildPyWithoutTestScaffolding})
