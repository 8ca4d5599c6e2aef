// The instruction sets this binary's C and C++ code was compiled for (the
// compiler's predefined macros, from the same CGO_CFLAGS that compiled
// llama.cpp and ggml), against those the machine has (cpuid through
// __builtin_cpu_supports on x86-64, the kernel's hwcaps on arm64).
//
// corral_cpu_check runs as a constructor before any other: before the C++
// static initializers of llama.cpp, which were compiled with those flags
// and may already use the instructions, and before the Go runtime. When
// the machine lacks one it prints what and exits, instead of letting the
// first such instruction die of SIGILL. It and what it calls are compiled
// for the architecture's baseline, whatever the flags.

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu.h"

#if defined(__x86_64__)
#    define CORRAL_BASELINE __attribute__((target("arch=x86-64")))
#elif defined(__aarch64__)
#    include <sys/auxv.h>
#    include <asm/hwcap.h>
#    define CORRAL_BASELINE __attribute__((target("arch=armv8-a")))
#else
#    define CORRAL_BASELINE
#endif

// A feature: its name (as Linux's /proc/cpuinfo spells it where it can)
// and whether the compiler targeted it.
struct corral_feature {
    const char * name;
    int          built;
};

#define FEATURE(macro, name) { name, macro }

#if defined(__x86_64__)
// Only the extensions a compiler emits from plain code (vectorized loops,
// bit operations) or that ggml's kernels test for: the ones a binary built
// on a newer machine can die of.
#    ifdef __SSE3__
#        define B_SSE3 1
#    else
#        define B_SSE3 0
#    endif
#    ifdef __SSSE3__
#        define B_SSSE3 1
#    else
#        define B_SSSE3 0
#    endif
#    ifdef __SSE4_1__
#        define B_SSE41 1
#    else
#        define B_SSE41 0
#    endif
#    ifdef __SSE4_2__
#        define B_SSE42 1
#    else
#        define B_SSE42 0
#    endif
#    ifdef __POPCNT__
#        define B_POPCNT 1
#    else
#        define B_POPCNT 0
#    endif
#    ifdef __AVX__
#        define B_AVX 1
#    else
#        define B_AVX 0
#    endif
#    ifdef __AVX2__
#        define B_AVX2 1
#    else
#        define B_AVX2 0
#    endif
#    ifdef __FMA__
#        define B_FMA 1
#    else
#        define B_FMA 0
#    endif
#    ifdef __F16C__
#        define B_F16C 1
#    else
#        define B_F16C 0
#    endif
#    ifdef __BMI__
#        define B_BMI 1
#    else
#        define B_BMI 0
#    endif
#    ifdef __BMI2__
#        define B_BMI2 1
#    else
#        define B_BMI2 0
#    endif
#    ifdef __LZCNT__
#        define B_LZCNT 1
#    else
#        define B_LZCNT 0
#    endif
#    ifdef __MOVBE__
#        define B_MOVBE 1
#    else
#        define B_MOVBE 0
#    endif
#    ifdef __AVXVNNI__
#        define B_AVXVNNI 1
#    else
#        define B_AVXVNNI 0
#    endif
#    ifdef __AVX512F__
#        define B_AVX512F 1
#    else
#        define B_AVX512F 0
#    endif
#    ifdef __AVX512CD__
#        define B_AVX512CD 1
#    else
#        define B_AVX512CD 0
#    endif
#    ifdef __AVX512BW__
#        define B_AVX512BW 1
#    else
#        define B_AVX512BW 0
#    endif
#    ifdef __AVX512DQ__
#        define B_AVX512DQ 1
#    else
#        define B_AVX512DQ 0
#    endif
#    ifdef __AVX512VL__
#        define B_AVX512VL 1
#    else
#        define B_AVX512VL 0
#    endif
#    ifdef __AVX512VNNI__
#        define B_AVX512VNNI 1
#    else
#        define B_AVX512VNNI 0
#    endif
#    ifdef __AVX512VBMI__
#        define B_AVX512VBMI 1
#    else
#        define B_AVX512VBMI 0
#    endif
#    ifdef __AVX512BF16__
#        define B_AVX512BF16 1
#    else
#        define B_AVX512BF16 0
#    endif
#    ifdef __AVX512FP16__
#        define B_AVX512FP16 1
#    else
#        define B_AVX512FP16 0
#    endif
#    ifdef __AMX_INT8__
#        define B_AMX_INT8 1
#    else
#        define B_AMX_INT8 0
#    endif
#    ifdef __AMX_TILE__
#        define B_AMX_TILE 1
#    else
#        define B_AMX_TILE 0
#    endif

static const struct corral_feature corral_features[] = {
    FEATURE(B_SSE3, "sse3"),           FEATURE(B_SSSE3, "ssse3"),           FEATURE(B_SSE41, "sse4_1"),
    FEATURE(B_SSE42, "sse4_2"),        FEATURE(B_POPCNT, "popcnt"),         FEATURE(B_AVX, "avx"),
    FEATURE(B_AVX2, "avx2"),           FEATURE(B_FMA, "fma"),               FEATURE(B_F16C, "f16c"),
    FEATURE(B_BMI, "bmi1"),            FEATURE(B_BMI2, "bmi2"),             FEATURE(B_LZCNT, "abm"),
    FEATURE(B_MOVBE, "movbe"),         FEATURE(B_AVXVNNI, "avx_vnni"),      FEATURE(B_AVX512F, "avx512f"),
    FEATURE(B_AVX512CD, "avx512cd"),   FEATURE(B_AVX512BW, "avx512bw"),     FEATURE(B_AVX512DQ, "avx512dq"),
    FEATURE(B_AVX512VL, "avx512vl"),   FEATURE(B_AVX512VNNI, "avx512_vnni"), FEATURE(B_AVX512VBMI, "avx512vbmi"),
    FEATURE(B_AVX512BF16, "avx512_bf16"), FEATURE(B_AVX512FP16, "avx512_fp16"), FEATURE(B_AMX_INT8, "amx_int8"),
    FEATURE(B_AMX_TILE, "amx_tile"),
};

// corral_has reports whether the machine has feature i of corral_features
// (__builtin_cpu_supports takes only a literal; it also checks that the
// kernel saves the AVX and AVX-512 registers).
CORRAL_BASELINE static int corral_has(int i) {
    switch (i) {
        case 0: return __builtin_cpu_supports("sse3");
        case 1: return __builtin_cpu_supports("ssse3");
        case 2: return __builtin_cpu_supports("sse4.1");
        case 3: return __builtin_cpu_supports("sse4.2");
        case 4: return __builtin_cpu_supports("popcnt");
        case 5: return __builtin_cpu_supports("avx");
        case 6: return __builtin_cpu_supports("avx2");
        case 7: return __builtin_cpu_supports("fma");
        case 8: return __builtin_cpu_supports("f16c");
        case 9: return __builtin_cpu_supports("bmi");
        case 10: return __builtin_cpu_supports("bmi2");
        case 11: return __builtin_cpu_supports("lzcnt");
        case 12: return __builtin_cpu_supports("movbe");
        case 13: return __builtin_cpu_supports("avxvnni");
        case 14: return __builtin_cpu_supports("avx512f");
        case 15: return __builtin_cpu_supports("avx512cd");
        case 16: return __builtin_cpu_supports("avx512bw");
        case 17: return __builtin_cpu_supports("avx512dq");
        case 18: return __builtin_cpu_supports("avx512vl");
        case 19: return __builtin_cpu_supports("avx512vnni");
        case 20: return __builtin_cpu_supports("avx512vbmi");
        case 21: return __builtin_cpu_supports("avx512bf16");
        case 22: return __builtin_cpu_supports("avx512fp16");
        case 23: return __builtin_cpu_supports("amx-int8");
        case 24: return __builtin_cpu_supports("amx-tile");
    }
    return 0;
}

#elif defined(__aarch64__)
#    ifdef __ARM_FEATURE_ATOMICS
#        define B_ATOMICS 1
#    else
#        define B_ATOMICS 0
#    endif
#    ifdef __ARM_FEATURE_CRC32
#        define B_CRC32 1
#    else
#        define B_CRC32 0
#    endif
#    ifdef __ARM_FEATURE_FP16_SCALAR_ARITHMETIC
#        define B_FPHP 1
#    else
#        define B_FPHP 0
#    endif
#    ifdef __ARM_FEATURE_FP16_VECTOR_ARITHMETIC
#        define B_ASIMDHP 1
#    else
#        define B_ASIMDHP 0
#    endif
#    ifdef __ARM_FEATURE_DOTPROD
#        define B_ASIMDDP 1
#    else
#        define B_ASIMDDP 0
#    endif
#    ifdef __ARM_FEATURE_MATMUL_INT8
#        define B_I8MM 1
#    else
#        define B_I8MM 0
#    endif
#    ifdef __ARM_FEATURE_BF16_VECTOR_ARITHMETIC
#        define B_BF16 1
#    else
#        define B_BF16 0
#    endif
#    ifdef __ARM_FEATURE_SVE
#        define B_SVE 1
#    else
#        define B_SVE 0
#    endif
#    ifdef __ARM_FEATURE_SVE2
#        define B_SVE2 1
#    else
#        define B_SVE2 0
#    endif
#    ifdef __ARM_FEATURE_SME
#        define B_SME 1
#    else
#        define B_SME 0
#    endif
#    ifndef HWCAP2_SME
#        define HWCAP2_SME (1UL << 23)
#    endif

static const struct corral_feature corral_features[] = {
    FEATURE(B_ATOMICS, "atomics"), FEATURE(B_CRC32, "crc32"), FEATURE(B_FPHP, "fphp"),
    FEATURE(B_ASIMDHP, "asimdhp"), FEATURE(B_ASIMDDP, "asimddp"), FEATURE(B_I8MM, "i8mm"),
    FEATURE(B_BF16, "bf16"),       FEATURE(B_SVE, "sve"),         FEATURE(B_SVE2, "sve2"),
    FEATURE(B_SME, "sme"),
};

CORRAL_BASELINE static int corral_has(int i) {
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    switch (i) {
        case 0: return (hw & HWCAP_ATOMICS) != 0;
        case 1: return (hw & HWCAP_CRC32) != 0;
        case 2: return (hw & HWCAP_FPHP) != 0;
        case 3: return (hw & HWCAP_ASIMDHP) != 0;
        case 4: return (hw & HWCAP_ASIMDDP) != 0;
        case 5: return (hw2 & HWCAP2_I8MM) != 0;
        case 6: return (hw2 & HWCAP2_BF16) != 0;
        case 7: return (hw & HWCAP_SVE) != 0;
        case 8: return (hw2 & HWCAP2_SVE2) != 0;
        case 9: return (hw2 & HWCAP2_SME) != 0;
    }
    return 0;
}

#else
static const struct corral_feature corral_features[] = { { "none", 0 } };

static int corral_has(int i) {
    (void) i;
    return 0;
}
#endif

#define CORRAL_NFEATURES ((int) (sizeof corral_features / sizeof corral_features[0]))

#ifdef CORRAL_CPU_PRETEND
// For cpu_test.go only: the machine "has" the features named in
// CORRAL_CPU_PRETEND (comma-separated, no spaces), so the refusal can be
// tested on any machine.
CORRAL_BASELINE static int corral_machine_has(int i) {
    const char * list = CORRAL_CPU_PRETEND;
    size_t       n    = strlen(corral_features[i].name);
    for (const char * p = list; *p;) {
        const char * end = strchr(p, ',');
        size_t       len = end ? (size_t) (end - p) : strlen(p);
        if (len == n && strncmp(p, corral_features[i].name, n) == 0) {
            return 1;
        }
        p += len + (end ? 1 : 0);
    }
    return 0;
}
#else
CORRAL_BASELINE static int corral_machine_has(int i) {
    return corral_has(i);
}
#endif

// corral_cpu_list writes into buf (NUL-terminated, at most size bytes) the
// names of the features selected by want: 'b' built for, 'm' the machine
// has, 'x' built for and missing from the machine; space-separated.
CORRAL_BASELINE int corral_cpu_list(char want, char * buf, int size) {
    int n = 0;
    if (size <= 0) {
        return 0;
    }
    buf[0] = 0;
    for (int i = 0; i < CORRAL_NFEATURES; i++) {
        int built = corral_features[i].built, has = corral_machine_has(i);
        int take = (want == 'b' && built) || (want == 'm' && has) || (want == 'x' && built && !has);
        if (!take) {
            continue;
        }
        size_t len = strlen(corral_features[i].name);
        if (n + (n > 0) + (int) len + 1 > size) {
            break;
        }
        if (n > 0) {
            buf[n++] = ' ';
        }
        memcpy(buf + n, corral_features[i].name, len);
        n += (int) len;
        buf[n] = 0;
    }
    return n;
}

CORRAL_BASELINE static void corral_puts(const char * s) {
    ssize_t r = write(2, s, strlen(s));
    (void) r;
}

// Priority 101 is the first a program may use: this runs before every
// constructor without a priority, those of llama.cpp's C++ included.
__attribute__((constructor(101))) CORRAL_BASELINE static void corral_cpu_check(void) {
    char missing[512], built[512];
#if defined(__x86_64__)
    __builtin_cpu_init();
#endif
    if (corral_cpu_list('x', missing, sizeof missing) == 0) {
        return;
    }
    corral_cpu_list('b', built, sizeof built);
    corral_puts("corral: this CPU cannot run this binary: it was built for [");
    corral_puts(built);
    corral_puts("] and the CPU lacks [");
    corral_puts(missing);
    corral_puts("]. Build on this machine (make build), or build for an older CPU "
                "(make build NATIVE=, or the release binaries of make dist).\n");
    _exit(CORRAL_CPU_EXIT);
}

// corral_amx_runs reports whether AMX instructions run here: a child
// process asks Linux for the tile data state (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), loads a tile configuration and
// zeroes a tile. CPUID is not enough: some virtual machines advertise AMX
// and kill the process at its first tile instruction (issue 20). The
// child runs only this C code (with SIGILL's default action, not the Go
// runtime's handler) and exits; the parent waits for it.
int corral_amx_runs(void) {
#if defined(__x86_64__)
    pid_t pid = fork();
    if (pid < 0) {
        return 0;
    }
    if (pid == 0) {
        struct sigaction sa;
        sigset_t         set;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGILL, &sa, NULL);
        sigaction(SIGSEGV, &sa, NULL);
        sigemptyset(&set);
        sigaddset(&set, SIGILL);
        sigaddset(&set, SIGSEGV);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) {
            _exit(2);
        }
        // Palette 1; tile 0: 1 row of 64 bytes.
        unsigned char cfg[64] __attribute__((aligned(64)));
        memset(cfg, 0, sizeof cfg);
        cfg[0]  = 1;
        cfg[16] = 64;
        cfg[48] = 1;
        __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
        __asm__ volatile("tilezero %%tmm0" : : : "memory");
        __asm__ volatile("tilerelease" : : : "memory");
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            return 0;
        }
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
#else
    return 0;
#endif
}
