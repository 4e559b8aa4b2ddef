# `batch status`'s one round trip, read-only, run with the privileges keadm would have
# (the upload dir is root's under sudo): whether edgecore runs (its pids), its version
# (the one the running edgecore logged as it started, else edgecore.yaml's
# edgecoreVersion: edgecore has no --version, and running it starts a second edgecore),
# and the version of the keadm a run of the config would use. It starts nothing but
# keadm's `version`. Each version is the first line the binary prints, cut to 200 bytes.
# Parameters:
#   KEADM   the keadm a run would use (keadmBinDir's, or the upload dir's)
#   EC_BIN  where keadm join installs edgecore
#   CERT    KubeEdge's default edge certificate, used when edgecore.yaml names none
# It also prints the edge certificate edgecore connects with (edgecore.yaml's
# edgeHub.tlsCertFile, else CERT) as PEM text, since nodes may have no openssl: the
# control host reads its expiry.
# Prints: KB_ST_EDGECORE_PIDS<pids>; KB_ST_EDGECORE <binary> <version> or
# KB_ST_EDGECORE_NONE; KB_ST_KEADM <version> or KB_ST_KEADM_NONE; KB_ST_CERT_NONE, or
# KB_ST_CERT_UNREADABLE <path>, or KB_ST_CERT_PATH <path> and its PEM lines each after
# KB_ST_CERT (at most 64 KiB read, 400 lines); KB_ST_DONE last.
# Exit: 0.
# shellcheck source=lib.sh
. ./lib.sh
first() { head -n 1 | cut -c 1-200; }
kb_edgecore_pids
echo "KB_ST_EDGECORE_PIDS$ec"
b=$EC_BIN
[ -x "$b" ] || b=$(command -v edgecore 2>/dev/null) || b=
if [ -n "$b" ] && [ -x "$b" ]; then
  v=
  for p in $ec; do v=$(kb_logged_version "$p"); break; done
  [ -n "$v" ] || v=$(kb_config_version)
  printf 'KB_ST_EDGECORE %s %s\n' "$b" "$(printf '%s' "$v" | first)"
else
  echo KB_ST_EDGECORE_NONE
fi
if [ -x "$KEADM" ] && [ ! -d "$KEADM" ]; then
  printf 'KB_ST_KEADM %s\n' "$("$KEADM" version </dev/null 2>&1 | first)"
else
  echo KB_ST_KEADM_NONE
fi
# edgeHub's tlsCertFile is the first in edgecore.yaml (its modules are written sorted).
f=$(sed -n 's/^[[:space:]]*tlsCertFile:[[:space:]]*//p' /etc/kubeedge/config/edgecore.yaml 2>/dev/null | head -n 1 | tr -d "\"' ")
[ -n "$f" ] && CERT=$f
if [ ! -e "$CERT" ]; then
  echo KB_ST_CERT_NONE
elif [ ! -r "$CERT" ] || [ ! -f "$CERT" ]; then
  printf 'KB_ST_CERT_UNREADABLE %s\n' "$CERT"
else
  printf 'KB_ST_CERT_PATH %s\n' "$CERT"
  head -c 65536 "$CERT" | sed -n '/-----BEGIN CERTIFICATE-----/,/-----END CERTIFICATE-----/s/^/KB_ST_CERT /p' | head -n 400
fi
echo KB_ST_DONE
