/* (being written) */
#ifndef CONVERSE_RS_CMS_H
#define CONVERSE_RS_CMS_H
#endif
