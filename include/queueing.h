/* (being written) */
#ifndef CONVERSE_RS_QUEUEING_H
#define CONVERSE_RS_QUEUEING_H
#endif
