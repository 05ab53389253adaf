/* Method family 'repr' (see algo_internal.h). */
#include "algo_internal.h"

const AlgoMethod algo_family_repr[1];
const int algo_family_repr_count = 0;
