"""One adapter per foreign system (Triton, Inductor, torch.distributed, torch's own flags). An
adapter imports the core, the runtime and ``_patching``; never the public API, never another adapter."""
