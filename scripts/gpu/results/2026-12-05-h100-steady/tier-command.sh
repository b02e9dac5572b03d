# call 3: the GPU tier, the three files in one pytest session
STEPS="" OUT=$OUT/setup bash scripts/run_gpu_bench.sh > /tmp/setup.txt 2>&1 || tail -20 /tmp/setup.txt
S=$SECONDS
(cd tests && timeout 550 /tmp/ag-gpu-venv/bin/python -m pytest -p no:cacheprovider -q -rs --durations=12 test_gpu.py test_gpu_compile.py test_gpu_templates.py) 2>&1 | tee $OUT/tier.txt | tail -30
echo "tier in $((SECONDS-S)) s"
