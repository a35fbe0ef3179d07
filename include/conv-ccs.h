/* (being written) */
#ifndef CONVERSE_RS_CONV_CCS_H
#define CONVERSE_RS_CONV_CCS_H
#endif
