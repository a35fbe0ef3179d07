/* (being written) */
#ifndef CONVERSE_RS_PUP_C_H
#define CONVERSE_RS_PUP_C_H
#endif
