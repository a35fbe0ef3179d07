/* (being written) */
#ifndef CONVERSE_RS_CONVERSE_RS_MEMORY_H
#define CONVERSE_RS_CONVERSE_RS_MEMORY_H
#endif
