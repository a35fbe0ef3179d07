/* (being written) */
#ifndef CONVERSE_RS_CONV_RANDOM_H
#define CONVERSE_RS_CONV_RANDOM_H
#endif
