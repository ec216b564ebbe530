#!/usr/bin/env bash
# usage: keep_checkpoint.sh CELL_CHECKPOINT_DIR/KEY KEEP_DIR/KEY  (a cell run without --keep-checkpoints)
# Hard-link every file of a checkpoint directory into a keep directory as it is (re)written, until the
# directory is gone (a finished cell deletes its checkpoint): the last state survives the cell.
src=$1; dst=$2
mkdir -p "$dst"
while [ -d "$src" ]; do
  for f in "$src"/*; do
    [ -e "$f" ] || continue
    b=$(basename "$f")
    case "$b" in *.partial) continue ;; esac  # a file being written: its final name comes next
    if [ ! -e "$dst/$b" ] || [ "$(stat -c %i "$f")" != "$(stat -c %i "$dst/$b")" ]; then
      ln -f "$f" "$dst/$b.tmp" 2>/dev/null && mv -f "$dst/$b.tmp" "$dst/$b" && echo "$(date +%T) kept $b"
    fi
  done
  sleep 1
done
echo "$(date +%T) $src gone"
