/* The manual's spelling of cpthreads.h. */
#include "cpthreads.h"
