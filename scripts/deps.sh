# Sourced by setup.sh, test.sh and fuzz.sh: installs what the build needs, when missing. Only what
# is absent is installed, so a machine that has everything makes no network call.
#  - Debian packages: the toolchain, nlohmann/json, CLI11, GoogleTest, Google Benchmark, and Gloo's
#    headers (LibTorch's c10d headers include them but the torch wheel does not ship them); for
#    scripts/fuzz.sh also clang with libFuzzer.
#  - LibTorch, from the torch wheel on PyPI, pinned to the GPU machines' version so that the same
#    code builds on both. If pip cannot install it, Debian's libtorch-dev (CPU only) is the fallback.
GPIPE_DEBIAN_PACKAGES=(cmake ninja-build g++ ccache python3 nlohmann-json3-dev libcli11-dev
                       libgtest-dev libgmock-dev googletest libbenchmark-dev libgloo-dev)
# Only for scripts/fuzz.sh: clang and libFuzzer (libclang_rt.fuzzer-x86_64.a, which the clang
# package only recommends: libclang-rt-dev pulls it in).
GPIPE_FUZZ_PACKAGES=(clang libclang-rt-dev)
GPIPE_TORCH_VERSION=2.11.0

_gpipe_sudo() {
  if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi
}

_gpipe_apt_install() {
  local missing=()
  for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing missing packages: ${missing[*]}"
  _gpipe_sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive _gpipe_sudo apt-get install -y -qq "${missing[@]}"
}

install_missing_packages() {
  _gpipe_apt_install "${GPIPE_DEBIAN_PACKAGES[@]}"
}

install_fuzz_packages() {
  _gpipe_apt_install "${GPIPE_DEBIAN_PACKAGES[@]}" "${GPIPE_FUZZ_PACKAGES[@]}"
}

# torch==GPIPE_TORCH_VERSION for python3 (its LibTorch is what the executor links).
install_torch() {
  if python3 -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$GPIPE_TORCH_VERSION')" 2>/dev/null; then
    return 0
  fi
  echo "installing torch==$GPIPE_TORCH_VERSION from PyPI (LibTorch for the executor; about 3 GB with its CUDA libraries)"
  if ! python3 -m pip install -q --root-user-action=ignore "torch==$GPIPE_TORCH_VERSION"; then
    echo "NOTE: pip could not install torch==$GPIPE_TORCH_VERSION; falling back to Debian's libtorch-dev (CPU only)"
    _gpipe_apt_install libtorch-dev libopenblas0-pthread
  fi
}

# Test dependencies: real models built from configs with random weights (nothing is downloaded at
# run time). torchvision pinned to the release that matches torch GPIPE_TORCH_VERSION; transformers
# (GPT-2 and Llama in models/examples, exported by executor/export_model.py) pinned to a release of
# the same months that pip installs next to that torch without changing it.
GPIPE_TORCHVISION_VERSION=0.26.0
GPIPE_TRANSFORMERS_VERSION=5.8.1
install_test_models() {
  if ! python3 -c "import sys, torchvision; sys.exit(torchvision.__version__.split('+')[0] != '$GPIPE_TORCHVISION_VERSION')" 2>/dev/null; then
    echo "installing torchvision==$GPIPE_TORCHVISION_VERSION from PyPI (ResNet-18 for the executor's tests)"
    python3 -m pip install -q --root-user-action=ignore "torch==$GPIPE_TORCH_VERSION" "torchvision==$GPIPE_TORCHVISION_VERSION" ||
      echo "NOTE: pip could not install torchvision==$GPIPE_TORCHVISION_VERSION; the ResNet-18 test (run_resnet18_torchvision) will fail"
  fi
  if ! python3 -c "import sys, transformers; sys.exit(transformers.__version__ != '$GPIPE_TRANSFORMERS_VERSION')" 2>/dev/null; then
    echo "installing transformers==$GPIPE_TRANSFORMERS_VERSION from PyPI (GPT-2 and Llama for the exporter's tests)"
    python3 -m pip install -q --root-user-action=ignore "torch==$GPIPE_TORCH_VERSION" "transformers==$GPIPE_TRANSFORMERS_VERSION" ||
      echo "NOTE: pip could not install transformers==$GPIPE_TRANSFORMERS_VERSION; the GPT-2 and Llama exports (tests/python/export_test.py) will fail"
  fi
}

# The CMAKE_PREFIX_PATH under which find_package(Torch) finds LibTorch.
torch_cmake_prefix() {
  local prefix
  if prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
    echo "$prefix"
  else
    echo /usr/lib/x86_64-linux-gnu/cmake
  fi
}
