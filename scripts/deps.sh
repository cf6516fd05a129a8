# Sourced by setup.sh and test.sh: installs the Debian packages the build needs, when missing.
# Only what is absent is installed, so a machine that has everything makes no network call.
GPIPE_DEBIAN_PACKAGES=(cmake ninja-build g++ ccache python3 nlohmann-json3-dev libcli11-dev
                       libgtest-dev libgmock-dev googletest libbenchmark-dev)

install_missing_packages() {
  local missing=()
  for package in "${GPIPE_DEBIAN_PACKAGES[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "installing missing packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}
