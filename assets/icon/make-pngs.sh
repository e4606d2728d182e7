#!/usr/bin/env bash
# Renders gpulab.svg into the PNG sizes of the freedesktop hicolor icon theme (16…512), the
# Windows .ico and the 256 px PNG the window uses. Needs ImageMagick (`convert`); the outputs are
# committed, so a build never runs this. Run from anywhere: assets/icon/make-pngs.sh
set -euo pipefail
cd "$(dirname "$0")"
for n in 16 24 32 48 64 128 256 512; do
  mkdir -p "hicolor/${n}x${n}/apps"
  convert -background none -density 384 gpulab.svg -resize "${n}x${n}" -strip "PNG32:hicolor/${n}x${n}/apps/gpulab.png"
done
convert hicolor/16x16/apps/gpulab.png hicolor/24x24/apps/gpulab.png hicolor/32x32/apps/gpulab.png \
  hicolor/48x48/apps/gpulab.png hicolor/64x64/apps/gpulab.png hicolor/256x256/apps/gpulab.png gpulab.ico
