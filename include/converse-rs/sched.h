/* (being written) */
#ifndef CONVERSE_RS_CONVERSE_RS_SCHED_H
#define CONVERSE_RS_CONVERSE_RS_SCHED_H
#endif
