#!/bin/sh
# Prints the Debian archive this machine's apt uses for bookworm (the
# first URI of a deb822 .sources stanza or a one-line sources.list entry
# that names the suite), so that the image is built from the mirror the
# machine is already allowed to reach.  No host name is kept in the tree.
#
#   deploy/image/debian-mirror.sh [SUITE]      (default: bookworm)

suite=${1:-bookworm}

for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    # deb822: stanzas separated by blank lines; take URIs of the first
    # stanza with Types: deb whose Suites list the suite itself
    awk -v suite="$suite" '
        function flush() {
            if (deb && uri != "" && hit) { print uri; found = 1; exit }
            deb = 0; uri = ""; hit = 0
        }
        /^[ \t]*$/          { flush(); next }
        /^#/                { next }
        tolower($1) == "types:" {
            for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1
        }
        tolower($1) == "uris:"   { uri = $2 }
        tolower($1) == "suites:" {
            for (i = 2; i <= NF; i++) if ($i == suite) hit = 1
        }
        END { if (!found) flush() }
    ' "$f" | head -n 1 | grep . && exit 0
done

for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    # deb [options] URI SUITE COMPONENTS...
    awk -v suite="$suite" '
        $1 == "deb" {
            i = 2
            if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; i++ }
            if ($(i + 1) == suite) { print $i; exit }
        }
    ' "$f" | head -n 1 | grep . && exit 0
done

echo "debian-mirror.sh: no deb source for $suite in /etc/apt" >&2
exit 1
