#!/usr/bin/env bash
# tests/test_gpu.py on a CUDA machine without network, run from the repository root:  bash .gpu/run.sh
# What .gpu (ignored by git: .git/info/exclude) carries:
#   whl/            the versions this project's .venv runs: transformers (pyproject pins >=5.16.1,<5.20),
#                   peft, accelerate; installed into /tmp/site, ahead of the machine's own copies
#   whl-if-needed/  huggingface_hub, tokenizers, regex, safetensors: installed only where the machine's own
#                   copy is missing or fails what the carried wheels require
#   smollm2-tokenizer/  SmolLM2-135M-Instruct's tokenizer files ($PRA_TOKENIZER_DIR: tests/fakes.py)
# Writes $OUT/run.log (all of it: installs, versions, GPU) and $OUT/gpu.log (pytest's report); exits
# with pytest's status.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
export PYTHONPATH=. HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
if compgen -G ".gpu/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
    && export PYTHONPATH=/tmp/site:.
  # Each wheel of whl-if-needed whose distribution is missing here, or whose installed version fails a
  # requirement of the carried distributions (their Requires-Dist, extras and foreign markers left out).
  needed=$(python3 - .gpu/whl-if-needed <<'EOF'
import sys
from importlib import metadata
from pathlib import Path
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

carried = [d for d in metadata.distributions(path=["/tmp/site"])]
wanted = {}
for dist in carried:
    for line in dist.requires or ():
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            wanted.setdefault(canonicalize_name(req.name), []).append(req)
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        have = None
    bad = [str(r) for r in wanted.get(name, []) if have is None or not r.specifier.contains(have, prereleases=True)]
    if have is None or bad:
        print(f"{name} {have or 'missing'} fails {', '.join(bad) or 'nothing'}: installing {wheel.name}", file=sys.stderr)
        print(wheel)
EOF
)
  if [ -n "$needed" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $needed
  fi
fi
echo "PYTHONPATH=$PYTHONPATH"
nvidia-smi -L
python3 - <<'EOF'
import platform, sys
print("python", platform.python_version(), sys.executable)
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
for name in ("transformers", "peft", "accelerate", "huggingface_hub", "tokenizers", "safetensors", "regex", "numpy",
             "sklearn", "pytest"):
    try:
        module = __import__(name)
        print(name, getattr(module, "__version__", "?"), module.__file__)
    except Exception as err:        # noqa: BLE001 -- reported, and the tests say what it breaks
        print(name, "NOT IMPORTABLE:", type(err).__name__, err)
EOF
PRA_REQUIRE=cuda PRA_TOKENIZER_DIR=.gpu/smollm2-tokenizer timeout -k 10 300 \
  python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -rA --durations=10 2>&1 | tee "$OUT/gpu.log"
exit "${PIPESTATUS[0]}"
