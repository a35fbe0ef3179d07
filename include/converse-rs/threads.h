/* (being written) */
#ifndef CONVERSE_RS_CONVERSE_RS_THREADS_H
#define CONVERSE_RS_CONVERSE_RS_THREADS_H
#endif
