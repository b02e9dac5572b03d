# call 1: steady (the README's first run makes the table), then record if time is left
PHASES="steady" bash scripts/gpu/acceptance.sh
