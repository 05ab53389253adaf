/* Method family 'server' (see algo_internal.h). */
#include "algo_internal.h"

const AlgoMethod algo_family_server[1];
const int algo_family_server_count = 0;
