#ifndef STORECTL_CYAML_SHIM_H
#define STORECTL_CYAML_SHIM_H
#include <yaml.h>
#endif
