#!/bin/sh
# Entrypoint of the proxima-vllm images: everything after the image name goes to `vllm serve`, as with
# vllm/vllm-openai, so `docker run IMAGE --model /models/x` (or `IMAGE /models/x`) serves /models/x on port 8000.
# Run another program with `--entrypoint`, e.g. `docker run --entrypoint vllm IMAGE --version`.
#
# For non-root runs (the `nonroot` target, or `--user UID:0` with any UID) it makes sure HOME is writable,
# since every cache vLLM and its libraries use (HF, Triton, torch, vLLM, numba) defaults to $HOME/.cache:
# an arbitrary UID that is not in /etc/passwd gets HOME=/home/vllm (group-0 writable) or a fresh /tmp dir,
# USER=vllm, and an /etc/passwd line (the file is group-0 writable in these images), as upstream's
# vllm-nonroot-entrypoint.sh does.
set -eu

if [ -z "${HOME:-}" ] || [ ! -w "${HOME}" ]; then
    if [ -w /home/vllm ]; then
        HOME=/home/vllm
    else
        HOME=$(mktemp -d /tmp/vllm-home.XXXXXX 2>/dev/null || echo /tmp)
    fi
    export HOME
fi
export USER="${USER:-vllm}"
export LOGNAME="${LOGNAME:-$USER}"

uid=$(id -u)
if [ "$uid" != 0 ] && [ -w /etc/passwd ] && ! grep -q "^[^:]*:[^:]*:${uid}:" /etc/passwd; then
    printf 'vllm:x:%s:%s:vllm:%s:/bin/sh\n' "$uid" "$(id -g)" "$HOME" >> /etc/passwd
fi
# A working directory that can't be entered falls back to HOME (a read-only one is kept: relative
# --model paths keep working).
cd . 2>/dev/null || cd "$HOME"

exec vllm serve "$@"
