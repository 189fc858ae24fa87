#!/usr/bin/env bats
# --stage-data as users write it (issue 10, items 9, 11, 21, 22, 23, 24): "~/" and "~user/" as the
# shell would expand them, one option per #SBATCH line adding up (with the command line, with
# --export=NONE too), names with ',' and ':' ("\," "\:"), a pax-header tar from Python's tarfile
# unpacked, a file that is not an archive copied under its own name, and max_bytes counting what
# is written.

load helpers

setup_file() {
  local home
  home=$(getent passwd "$STAGEHAND_TEST_USER" | cut -d: -f6)
  W=$STAGEHAND_CLUSTER_DIR/work/gram
  rm -rf "$W" "$home/stagehand-gram"
  mkdir -p "$W/a,b:c" "$W/one" "$W/two" "$home/stagehand-gram/x"
  echo comma-colon >"$W/a,b:c/f"
  echo odd-file >"$W/x:y,z.bin"
  echo one >"$W/one/f"
  echo two >"$W/two/f"
  echo three >"$W/three.txt"
  echo cmdline >"$W/cl.txt"
  echo home-x >"$home/stagehand-gram/x/f"
  echo home-y >"$home/stagehand-gram/y.bin"
  echo not-a-tar >"$W/notes.tar"
  (cd "$W" && /usr/bin/python3 -c "
import io, tarfile
with tarfile.open('pax.tar', 'w', format=tarfile.PAX_FORMAT) as t:
    for name in ('d\u00e9j\u00e0.txt', 'plain.txt'):
        data = name.encode() + b'\n'
        info = tarfile.TarInfo(name); info.size = len(data)
        t.addfile(info, io.BytesIO(data))
")
  mkdir -p "$W/small" && (cd "$W/small" && for i in $(seq 1 300); do echo "$i" >"f$i"; done)
  tar cf "$W/small.tar" -C "$W/small" .
  head -c 3000000 /dev/zero >"$W/zeros" && tar czf "$W/zeros.tar.gz" -C "$W" zeros
  chown -R "$STAGEHAND_TEST_USER:" "$W" "$home/stagehand-gram"
}

teardown_file() {
  rm -rf "$(getent passwd "$STAGEHAND_TEST_USER" | cut -d: -f6)/stagehand-gram"
}

@test "~/ and ~user/ in --stage-data expand as the shell would, as the submitting user" {
  script tilde.sh <<EOF2
#!/bin/bash
#SBATCH --stage-data=~/stagehand-gram/x
#SBATCH --stage-data=~$STAGEHAND_TEST_USER/stagehand-gram/y.bin:yy
cat "\$SLURM_TMPDIR/x/f" "\$SLURM_TMPDIR/yy"
srun -N1 -w node1 cat "\$SLURM_TMPDIR/x/f"
EOF2
  submit -N1 -w node1 tilde.sh
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -cx home-x)" -eq 2 ]
  echo "$LAST_OUTPUT" | grep -qx home-y
  # A missing one: refused at submit, naming what "~" became.
  submit -N1 --stage-data='~/stagehand-gram/nope' --wrap true
  [ "$JOB_RC" -ne 0 ]
  [ -z "$JOB_ID" ]
  echo "$SUBMIT_OUTPUT" | grep -q "stage-data: ~/stagehand-gram/nope: no such file or directory (/.*/stagehand-gram/nope)"
}

# Several --stage-data (one per #SBATCH line, one repeated, one on the command line) all arrive,
# in the batch step and in a step on each node; --export=NONE too.
@test "one --stage-data per #SBATCH line and the command line add up (identical ones merged), --export=NONE too" {
  script show.sh <<'EOF2'
/bin/cat "$SLURM_TMPDIR/gram/one/f" "$SLURM_TMPDIR/t2/f" "$SLURM_TMPDIR/gram/three.txt" "$SLURM_TMPDIR/cl" | /usr/bin/tr '\n' ' '
EOF2
  sed "s|@SRUN@|${STAGEHAND_SLURM_BIN:-/usr/bin}/srun|" <<'EOF2' | script repeated.sh
#!/bin/bash
#SBATCH --stage-data=gram/one
#SBATCH --stage-data=gram/two:t2
#SBATCH --stage-data=gram/one
echo "batch $(/bin/bash show.sh)"
@SRUN@ -N2 -n2 /bin/bash -c 'echo "step $SLURMD_NODENAME $(/bin/bash show.sh)"'
EOF2
  for export in ALL NONE; do
    submit --export=$export -N2 -n2 --stage-data=gram/three.txt,gram/one --stage-data=gram/cl.txt:cl repeated.sh
    [ "$JOB_RC" -eq 0 ]
    [ "$(echo "$LAST_OUTPUT" | grep -cx 'batch one two three cmdline ')" -eq 1 ]
    [ "$(echo "$LAST_OUTPUT" | grep -cx 'step node1 one two three cmdline ')" -eq 1 ]
    [ "$(echo "$LAST_OUTPUT" | grep -cx 'step node2 one two three cmdline ')" -eq 1 ]
    # Given three times, staged once per node.
    [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: copied .*/gram/one ')" -eq 1 ]
    [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node2: copied .*/gram/one ')" -eq 1 ]
  done
}

@test "names with ',' and ':' stage when written as \\, and \\: (and reach every node)" {
  submit -N2 -n2 "--stage-data='gram/a\\,b\\:c,gram/x\\:y\\,z.bin'" --wrap "'srun cat \"\$SLURM_TMPDIR/gram/a,b:c/f\" \"\$SLURM_TMPDIR/gram/x:y,z.bin\"'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -cx comma-colon)" -eq 2 ]
  [ "$(echo "$LAST_OUTPUT" | grep -cx odd-file)" -eq 2 ]
  # Unescaped, the comma splits the name into two sources: refused at submit, naming one.
  submit -N1 --stage-data=gram/a,b --wrap true
  [ -z "$JOB_ID" ]
  echo "$SUBMIT_OUTPUT" | grep -q 'stage-data: gram/a: no such file or directory'
}

@test "a pax-header tar (Python's tarfile, non-ASCII first name) unpacks; a .tar that is not one is copied under its name" {
  for daemon in up down; do
    [ "$daemon" = up ] || "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-stop node1 KILL
    submit -N1 -w node1 --stage-data=gram/pax.tar,gram/notes.tar --wrap "'cat \"\$SLURM_TMPDIR/gram/pax/plain.txt\" \"\$SLURM_TMPDIR/gram/notes.tar\"; ls \"\$SLURM_TMPDIR/gram/pax\"'"
    [ "$JOB_RC" -eq 0 ]
    echo "$LAST_OUTPUT" | grep -qx plain.txt
    echo "$LAST_OUTPUT" | grep -qx not-a-tar
    echo "$LAST_OUTPUT" | grep -qx "d$(printf '\303\251')j$(printf '\303\240').txt"
  done
}

@test "max_bytes counts what is written: a tar of small files over it packed stages; a small gzip that unpacks past it stops with one line" {
  set_tmpdir_config "" "[stage]
max_bytes = \"100K\""
  submit -N1 -w node1 --stage-data=gram/small.tar --wrap "'cat \"\$SLURM_TMPDIR/gram/small/f300\"'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx 300
  submit -N1 -w node1 --stage-data=gram/zeros.tar.gz --wrap "'echo should-not-run'"
  [ "$JOB_RC" -ne 0 ]
  ! echo "$LAST_OUTPUT" | grep -q should-not-run || false
  [ "$(echo "$LAST_OUTPUT" | grep -c 'gram/zeros.tar.gz: unpacks to more than 102400 bytes (limit)')" -ge 1 ]
}
