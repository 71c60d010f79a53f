/* SPDX-License-Identifier: GPL-2.0 */
/* The module's version (modinfo, /sys/module/unload/version); = the project's version,
 * which CMake checks at configure time. */
#ifndef UNLOAD_VERSION_H
#define UNLOAD_VERSION_H
#define UNLOAD_MODULE_VERSION "0.1.0"
#endif
