#!/bin/sh
# The image's base: a Debian 12 (bookworm) minbase root made with
# debootstrap from the mirror of this machine's apt sources, imported
# into podman's storage as $BASE_IMAGE.  The rootfs tarball is kept in
# DIR, so a second `make image` (or one after `podman rmi`) does not run
# debootstrap again; delete DIR/base-bookworm.tar to start over.
#
#   deploy/image/base.sh DIR [PODMAN...]

set -eu

dir=$1; shift
podman=${*:-podman}
image=${BASE_IMAGE:-localhost/ngx-rlm-base:bookworm}
here=$(cd "$(dirname "$0")" && pwd)
tarball=$dir/base-bookworm.tar

if [ ! -s "$tarball" ]; then
    mirror=$("$here/debian-mirror.sh" bookworm)
    security=$("$here/debian-mirror.sh" bookworm-security || true)
    root=$dir/rootfs
    echo "ngx_rlm: debootstrap bookworm from $mirror into $root"
    rm -rf "$root"
    mkdir -p "$dir"
    debootstrap --variant=minbase bookworm "$root" "$mirror" \
        > "$dir/debootstrap.log" 2>&1 \
        || { tail -n 20 "$dir/debootstrap.log" >&2; exit 1; }

    # the same archives for apt inside the image
    {
        echo "deb $mirror bookworm main"
        echo "deb $mirror bookworm-updates main"
        [ -z "$security" ] || echo "deb $security bookworm-security main"
    } > "$root/etc/apt/sources.list"

    # no documentation, manuals or locales from later installs
    cat > "$root/etc/dpkg/dpkg.cfg.d/01-ngx-rlm-nodoc" <<'NODOC'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
NODOC
    rm -rf "$root"/var/cache/apt/archives/*.deb \
           "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/*/changelog* \
           "$root"/usr/share/man/* "$root"/usr/share/locale/*

    tar --numeric-owner --xattrs -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
fi

if ! $podman image exists "$image"; then
    echo "ngx_rlm: importing $tarball as $image"
    $podman import --quiet "$tarball" "$image" >/dev/null
fi
