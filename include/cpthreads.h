/* (being written) */
#ifndef CONVERSE_RS_CPTHREADS_H
#define CONVERSE_RS_CPTHREADS_H
#endif
