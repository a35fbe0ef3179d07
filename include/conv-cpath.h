/* (being written) */
#ifndef CONVERSE_RS_CONV_CPATH_H
#define CONVERSE_RS_CONV_CPATH_H
#endif
