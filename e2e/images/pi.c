/* Monte Carlo pi over MPI: every rank samples points in the unit square, rank 0 adds up the hits with
 * MPI_Reduce and prints the estimate, then which host each rank ran on (gathered with MPI_Gather).
 *   pi [samples per rank (default 10000000)] [seconds every rank sleeps before reducing (default 0)]
 * The sleep makes a job long enough to disturb while it runs (the e2e tests delete a worker then). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t next(uint64_t *state) { /* xorshift64* */
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1DULL;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, len;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    MPI_Get_processor_name(host, &len);

    long long samples = argc > 1 ? atoll(argv[1]) : 10000000LL;
    int pause_seconds = argc > 2 ? atoi(argv[2]) : 0;
    uint64_t state = 0x9E3779B97F4A7C15ULL * (uint64_t)(rank + 1);
    long long inside = 0, total = 0;
    for (long long i = 0; i < samples; i++) {
        double x = (double)(next(&state) >> 11) / 9007199254740992.0;
        double y = (double)(next(&state) >> 11) / 9007199254740992.0;
        inside += x * x + y * y <= 1.0;
    }
    if (pause_seconds > 0) {
        if (rank == 0) {
            printf("every rank sleeps %d s before reducing\n", pause_seconds);
            fflush(stdout);
        }
        sleep((unsigned)pause_seconds);
    }
    MPI_Reduce(&inside, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

    char *hosts = rank == 0 ? calloc((size_t)size, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (rank == 0) {
        double pi = 4.0 * (double)total / ((double)samples * size);
        printf("pi is approximately %.8f (%lld samples on %d ranks)\n", pi, samples * size, size);
        for (int r = 0; r < size; r++) printf("rank %d on %s\n", r, hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME);
        fflush(stdout);
        free(hosts);
    }
    MPI_Finalize();
    return 0;
}
