#include "textflag.h"

// func memoryPages() uint32
TEXT ·memoryPages(SB), NOSPLIT, $0-4
	Get SP
	CurrentMemory
	I32Store ret+0(FP)
	RET
