/* Method family 'sam' (see algo_internal.h). */
#include "algo_internal.h"

const AlgoMethod algo_family_sam[1];
const int algo_family_sam_count = 0;
