/* Losses on logits [batch, classes]. Each returns the mean loss and accumulates d(loss)/d(logits). */
#include <math.h>

#include "fedhet/nn.h"

float nn_softmax_xent(float *dlogits, float *per_sample, const float *logits, const int32_t *labels,
                      const float *weights, const float *logit_adjust, int batch, int classes)
{
    double total = 0.0;
    float inv_batch = 1.0f / (float)batch;
    for (int i = 0; i < batch; i++) {
        const float *z = logits + (int64_t)i * classes;
        float *dz = dlogits + (int64_t)i * classes;
        float adj0 = logit_adjust ? logit_adjust[0] : 0.0f;
        float zmax = z[0] + adj0;
        for (int k = 1; k < classes; k++) {
            float v = z[k] + (logit_adjust ? logit_adjust[k] : 0.0f);
            if (v > zmax) zmax = v;
        }
        double sum = 0.0;
        for (int k = 0; k < classes; k++) sum += exp((double)(z[k] + (logit_adjust ? logit_adjust[k] : 0.0f) - zmax));
        double lse = (double)zmax + log(sum);
        int y = labels[i];
        double loss = lse - (double)(z[y] + (logit_adjust ? logit_adjust[y] : 0.0f));
        float w = weights ? weights[i] : 1.0f;
        if (per_sample) per_sample[i] = (float)loss;
        total += (double)w * loss;
        float g = w * inv_batch;
        for (int k = 0; k < classes; k++) {
            double p = exp((double)(z[k] + (logit_adjust ? logit_adjust[k] : 0.0f)) - lse);
            dz[k] += g * ((float)p - (k == y ? 1.0f : 0.0f));
        }
    }
    return (float)(total / batch);
}

float nn_kl_distill(float *dlogits, const float *student, const float *teacher, float temperature, float weight,
                    int batch, int classes)
{
    double total = 0.0;
    double inv_t = 1.0 / temperature;
    float g = weight * temperature / (float)batch; /* d/ds of w T^2 KL(p_t || p_s(s/T)) = w T (p_s - p_t) */
    for (int i = 0; i < batch; i++) {
        const float *s = student + (int64_t)i * classes, *t = teacher + (int64_t)i * classes;
        double smax = s[0], tmax = t[0];
        for (int k = 1; k < classes; k++) {
            if (s[k] > smax) smax = s[k];
            if (t[k] > tmax) tmax = t[k];
        }
        double ssum = 0.0, tsum = 0.0;
        for (int k = 0; k < classes; k++) {
            ssum += exp((s[k] - smax) * inv_t);
            tsum += exp((t[k] - tmax) * inv_t);
        }
        double slse = log(ssum), tlse = log(tsum), kl = 0.0;
        for (int k = 0; k < classes; k++) {
            double log_ps = (s[k] - smax) * inv_t - slse, log_pt = (t[k] - tmax) * inv_t - tlse;
            double pt = exp(log_pt);
            kl += pt * (log_pt - log_ps);
            dlogits[(int64_t)i * classes + k] += g * (float)(exp(log_ps) - pt);
        }
        total += kl;
    }
    return (float)((double)weight * temperature * temperature * total / batch);
}

int nn_count_correct(int32_t *pred, const float *logits, const int32_t *labels, int batch, int classes)
{
    int correct = 0;
    for (int i = 0; i < batch; i++) {
        const float *z = logits + (int64_t)i * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (z[k] > z[best]) best = k;
        if (pred) pred[i] = best;
        if (labels && labels[i] == best) correct++;
    }
    return correct;
}
