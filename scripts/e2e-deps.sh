#!/usr/bin/env bash
# Installs what the end-to-end tests need, from Debian's packages: Chromium
# (driven by chromedp) and nginx (the reverse proxy of the deploy tests).
# Run as root; prints what it did. Safe to run again: it installs only what
# is missing.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
if [ ${#need[@]} -eq 0 ]; then
  echo "e2e-deps: chromium and nginx already installed"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "e2e-deps: missing ${need[*]}; run this script as root to install them" >&2
  exit 1
fi
echo "e2e-deps: installing ${need[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The nginx package starts a service on port 80; the tests run their own.
systemctl stop nginx 2>/dev/null || service nginx stop 2>/dev/null || true
echo "e2e-deps: installed ${need[*]}"
