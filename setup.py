"""Build the optional C speedups (crawlq._speedups); everything else is in pyproject.toml.

The extension is optional: where no C compiler is at hand the build goes on without it
and crawlq runs its pure-Python code (same results, slower add).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "crawlq._speedups",
            sources=["src/crawlq/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
