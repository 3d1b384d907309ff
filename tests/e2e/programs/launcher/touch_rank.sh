#!/bin/sh
# Launcher scenario worker without Python: creates $1/$RANK.
file="$1/$RANK"
echo "creating $file"
touch "$file"
