#!/usr/bin/env bash
# Installs what the end-to-end tests need, from Debian's packages: Chromium
# (driven by chromedp), nginx (the reverse proxy of the deploy tests) and
# PostgreSQL (the server the store/postgres tests start, internal/testkit's
# Postgres; Debian keeps initdb in /usr/lib/postgresql/<major>/bin, off PATH).
# Run as root; prints what it did. Safe to run again: it installs only what
# is missing.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
have_initdb() {
  command -v initdb >/dev/null 2>&1 && return 0
  for f in /usr/lib/postgresql/*/bin/initdb; do [ -x "$f" ] && return 0; done
  return 1
}
have_initdb || need+=(postgresql)
if [ ${#need[@]} -eq 0 ]; then
  echo "e2e-deps: chromium, nginx and postgresql already installed"
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
# The nginx package starts a service on port 80, postgresql a cluster on
# 5432; the tests run their own.
for svc in nginx postgresql; do
  case " ${need[*]} " in *" $svc "*)
    systemctl stop "$svc" 2>/dev/null || service "$svc" stop 2>/dev/null || true ;;
  esac
done
echo "e2e-deps: installed ${need[*]}"
