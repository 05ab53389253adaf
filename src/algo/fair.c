/* Method family 'fair' (see algo_internal.h). */
#include "algo_internal.h"

const AlgoMethod algo_family_fair[1];
const int algo_family_fair_count = 0;
