/* (being written) */
#ifndef CONVERSE_RS_GAMMA_H
#define CONVERSE_RS_GAMMA_H
#endif
