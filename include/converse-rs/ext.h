/* (being written) */
#ifndef CONVERSE_RS_CONVERSE_RS_EXT_H
#define CONVERSE_RS_CONVERSE_RS_EXT_H
#endif
