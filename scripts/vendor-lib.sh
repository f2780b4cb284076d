# vendor-lib.sh is sourced by the vendor-*.sh scripts: a scratch directory
# ($work, removed on exit), fetch (npm pack a pinned package and unpack it)
# and need (fail loudly when a package no longer ships a file).
# The sourcing script sets $vendor_name (for messages) first.

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

fetch() { # fetch <package> <version> <dir>: npm pack and unpack into $work/<dir>
	local pkg="$1" version="$2" dir="$3"
	mkdir -p "${work}/${dir}"
	local tgz
	tgz="$(cd "${work}" && npm pack --silent "${pkg}@${version}" | tail -n 1)"
	tar -xzf "${work}/${tgz}" -C "${work}/${dir}" --strip-components=1
}

need() { # need <file>: fail loudly when a package no longer ships a file
	[[ -f "$1" ]] || { echo "${vendor_name}: missing $1 in the npm package" >&2; exit 1; }
}
