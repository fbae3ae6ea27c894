"""The CPU every benchmark table names (/proc/cpuinfo): its model name, and a line with the
vector ISA and bf16 instructions that decide which kernels moet picks."""


def _cpuinfo():
    model, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "?":
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, flags


def cpu_model():
    return _cpuinfo()[0]


def cpu_line():
    model, flags = _cpuinfo()
    bf16 = [x for x in ("amx_bf16", "avx512_bf16") if x in flags]
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    return f"{model}, {isa}, bf16 instructions: {', '.join(bf16) if bf16 else 'none'}"
