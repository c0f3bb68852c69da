"""Make an install bundle of proxima-vllm for an air-gapped host.

A bundle is a folder with our wheel (the CPU or CUDA variant), every dependency wheel for one
target Python and platform, a pinned ``requirements.txt``, the installer (``install.sh``, a copy
of ``install_bundle.sh`` in this package), ``bundle.env`` (what the installer checks) and
``SHA256SUMS``
over all of it. With ``--split-mb N`` the wheels travel as ``wheels.tar.part-000``, ``-001``, …
of at most N MiB each; the installer checks every part, joins them and checks the joined tar
against its own sha256 before unpacking.

How the wheel set is found: ``pip install --dry-run --report`` resolves our wheel's requirements
for the target (``--python-version``, ``--glibc``; binary wheels only; the CPU variant is
constrained by ``requirements/cpu.lock``, so the bundle holds the versions the test suite runs),
reading only the index's metadata. Then ``pip download --no-deps --require-hashes`` fetches exactly
those files (with pip's cache and config, so a TLS-intercepting proxy's CA setting works), and
their sha256 are checked against the resolution.

``--exclude-torch`` leaves out torch and its runtime (triton and the ``nvidia-*``/``cuda-*`` wheels
that torch depends on): for hosts that already have torch 2.11.0 (a GPU host's CUDA build), which
the installer then requires. torchvision/torchaudio/torchcodec (small) stay in the bundle.

Usage::

    PYTHONPATH=tools python3 -m proxima_tools.bundle --variant cpu [--exclude-torch] [--split-mb 60]
    bash BUNDLE/install.sh --venv /opt/proxima     # on the target host, no network needed

Prints the bundle folder on stdout; progress goes to stderr. Exit 1 with
``offline_bundle: error: ...``.
"""

from __future__ import annotations

from proxima_tools.bundle.build import (
    README,
    build,
)
from proxima_tools.bundle.cli import (
    main,
)
from proxima_tools.bundle.common import (
    CHUNK,
    CPU_LOCK,
    INSTALLER,
    TORCH_RUNTIME,
    TORCH_VERSION,
    UPSTREAM_VERSION,
    WHEEL_TAG,
    BundleError,
    canonical,
    default_wheel,
    log,
    read_version,
    sha256_of,
    wheel_version,
)
from proxima_tools.bundle.files import (
    glibc_floor,
    make_tar,
    split_file,
    write_sha256sums,
)
from proxima_tools.bundle.resolve import (
    Pinned,
    download,
    platform_args,
    resolve,
    torch_runtime,
)

__all__ = [
    "BundleError",
    "CHUNK",
    "CPU_LOCK",
    "INSTALLER",
    "Pinned",
    "README",
    "TORCH_RUNTIME",
    "TORCH_VERSION",
    "UPSTREAM_VERSION",
    "WHEEL_TAG",
    "build",
    "canonical",
    "default_wheel",
    "download",
    "glibc_floor",
    "log",
    "main",
    "make_tar",
    "platform_args",
    "read_version",
    "resolve",
    "sha256_of",
    "split_file",
    "torch_runtime",
    "wheel_version",
    "write_sha256sums",
]
