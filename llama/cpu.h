// Declarations of cpu.c: the instruction sets the binary was built for and
// those the machine has.
#ifndef CORRAL_CPU_H
#define CORRAL_CPU_H

#ifdef __cplusplus
extern "C" {
#endif

// The exit status of a process whose CPU lacks an instruction set the
// binary was built for (EX_SOFTWARE would blame the program; this is the
// machine: EX_UNAVAILABLE).
#define CORRAL_CPU_EXIT 69

int corral_cpu_list(char want, char * buf, int size);
int corral_amx_runs(void);

#ifdef __cplusplus
}
#endif

#endif
